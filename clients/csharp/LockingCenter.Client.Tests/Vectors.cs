using System;
using System.Collections.Generic;
using System.IO;
using System.Linq;

namespace LockingCenter.Tests
{
    /// <summary>clients/testdata/vectors.json, shared by every client's tests.</summary>
    static class Vectors
    {
        static Dictionary<string, object> root;

        public static void Load(string path)
        {
            root = (Dictionary<string, object>)MiniJson.Parse(File.ReadAllText(path));
        }

        /// <summary>The objects of list <paramref name="name"/>; fails when there are none.</summary>
        public static List<Dictionary<string, object>> List(string name)
        {
            var items = ((List<object>)root[name]).Cast<Dictionary<string, object>>().ToList();
            Check.That(items.Count > 0, "no " + name + " in the vector file");
            return items;
        }

        /// <summary>The hex field <paramref name="name"/> of v as bytes; absent means empty.</summary>
        public static byte[] Bytes(Dictionary<string, object> v, string name)
        {
            object hex;
            if (!v.TryGetValue(name, out hex)) return new byte[0];
            string s = (string)hex;
            Check.That(s.Length % 2 == 0, name + ": odd hex length");
            var b = new byte[s.Length / 2];
            for (int i = 0; i < b.Length; i++) b[i] = Convert.ToByte(s.Substring(2 * i, 2), 16);
            return b;
        }

        public static string Text(Dictionary<string, object> v, string name) => (string)v[name];

        /// <summary>The action of v, mapped through the file's own "actions" table.</summary>
        public static RequestAction Action(Dictionary<string, object> v)
        {
            var actions = (Dictionary<string, object>)root["actions"];
            return (RequestAction)(byte)(double)actions[Text(v, "action")];
        }

        public static string Hex(byte[] b) => BitConverter.ToString(b).Replace("-", "").ToLowerInvariant();
    }
}
